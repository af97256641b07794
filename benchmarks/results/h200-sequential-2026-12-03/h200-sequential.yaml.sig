{
  "payloadType": "application/vnd.in-toto+json",
  "payload": "eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEiLCJwcmVkaWNhdGUiOnsia2l0IjoibWFuaWZlc3QifSwicHJlZGljYXRlVHlwZSI6InVybjpraXQ6bWFuaWZlc3QtYXBwcm92YWw6MSIsInN1YmplY3QiOlt7ImRpZ2VzdCI6eyJzaGEyNTYiOiIyOGUwNjBiMGJkODhiOWM3NWQ5MjRjMjZjMWE0M2Q0ZGY0OTFhYzdmZWEwZDRmMmIyNDU1MjhmNDlkM2U4ZTlkIn0sIm5hbWUiOiJoMjAwLXNlcXVlbnRpYWwueWFtbCJ9XX0=",
  "signatures": [
    {
      "keyid": "SHA256:+7JblY1FdA9i3H5v5xHFp5RlvuS2IFBmP4Kwmrl738s",
      "sig": "b1vK1qBtOnInr6HD9DBGoNGGJwL0xRIdriZJ50OaiUTlHR+TRtjhpjJfjpY+ZDiJQVp4rSpvKZXn545syP7ABw==",
      "publicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE3lKu2Eaqir5Wi+R44pDwEuDfFJHlGGFKEXqIYwyP52 kit-example"
    }
  ]
}
