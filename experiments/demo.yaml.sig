{
  "payloadType": "application/vnd.in-toto+json",
  "payload": "eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEiLCJwcmVkaWNhdGUiOnsia2l0IjoibWFuaWZlc3QifSwicHJlZGljYXRlVHlwZSI6InVybjpraXQ6bWFuaWZlc3QtYXBwcm92YWw6MSIsInN1YmplY3QiOlt7ImRpZ2VzdCI6eyJzaGEyNTYiOiIzZmM1MmM2MmMxMzYyZDNhZTFjNzFjOTFjYmUxZjczYmE3YmE3NWVmNTg3OTFhZmIzM2M1NGQwZmI2MWNiYjM4In0sIm5hbWUiOiJkZW1vLnlhbWwifV19",
  "signatures": [
    {
      "keyid": "SHA256:+7JblY1FdA9i3H5v5xHFp5RlvuS2IFBmP4Kwmrl738s",
      "sig": "aROoI568yEn5iBijH1mi1LfTJFX9ILyc3Bu80nXCC+wYfqafvuSL0MmR1pz5B9TVRLPlI/GjQmcquyub+ap+Ag==",
      "publicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE3lKu2Eaqir5Wi+R44pDwEuDfFJHlGGFKEXqIYwyP52 kit-example"
    }
  ]
}
